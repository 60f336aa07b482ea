from graph import bfs_order, components, distances, from_edges, shortest_path_length

EDGES = [(1, 2), (1, 3), (2, 4), (3, 4), (4, 5), (6, 7)]


def test_from_edges_is_symmetric():
    graph = from_edges([(1, 2), (2, 3)])
    assert graph == {1: [2], 2: [1, 3], 3: [2]}


def test_bfs_order():
    assert bfs_order(from_edges(EDGES), 1) == [1, 2, 3, 4, 5]


def test_bfs_isolated_start():
    assert bfs_order({}, "x") == ["x"]


def test_distances():
    assert distances(from_edges(EDGES), 1) == {1: 0, 2: 1, 3: 1, 4: 2, 5: 3}


def test_shortest_path_length():
    graph = from_edges(EDGES)
    assert shortest_path_length(graph, 1, 5) == 3
    assert shortest_path_length(graph, 5, 5) == 0


def test_unreachable():
    assert shortest_path_length(from_edges(EDGES), 1, 7) == -1


def test_components():
    assert components(from_edges(EDGES)) == [[1, 2, 3, 4, 5], [6, 7]]


def test_cycle():
    ring = from_edges([(i, (i + 1) % 6) for i in range(6)])
    assert shortest_path_length(ring, 0, 3) == 3
    assert shortest_path_length(ring, 0, 5) == 1
