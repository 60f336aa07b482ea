"""Breadth-first search over undirected graphs given as adjacency dictionaries."""

from collections import deque


def from_edges(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, []).append(a)
    return graph


def bfs_order(graph, start):
    """Nodes in the order a breadth-first search from `start` reaches them."""
    seen, order, queue = {start}, [], deque([start])
    while queue:
        node = queue.popleft()
        order.append(node)
        for neighbour in graph.get(node, []):
            if neighbour not in seen:
                seen.add(neighbour)
                queue.append(neighbour)
    return order


def distances(graph, start):
    """The number of edges on a shortest path from `start` to each reachable node."""
    dist, queue = {start: 0}, deque([start])
    while queue:
        node = queue.popleft()
        for neighbour in graph.get(node, []):
            if neighbour not in dist:
                dist[neighbour] = dist[node] + 1
                queue.append(neighbour)
    return dist


def shortest_path_length(graph, start, goal):
    """Edges on a shortest path, or -1 when `goal` cannot be reached."""
    return distances(graph, start).get(goal, -1)


def components(graph):
    """The connected components as sorted lists, ordered by their smallest node."""
    seen, out = set(), []
    for node in sorted(graph):
        if node not in seen:
            part = bfs_order(graph, node)
            seen.update(part)
            out.append(sorted(part))
    return out
