"""Game prompts against data.max_prompt_tokens: the length the training step and `nash-jax plan` are
sized for. Every decision state's prompt is checked before a run's first work; a player checks each
round's prompts as well (a game too large to enumerate)."""

from collections import deque

from nash_jax.tasks.games.games import encode_prompt


def check_prompt_lengths(requests, prompt_ids, max_tokens):
    """ValueError naming the state of the first prompt longer than `max_tokens` (data.max_prompt_tokens;
    None: no limit): the training step, and `nash-jax plan`, are sized for prompts up to it."""
    if max_tokens is None:
        return
    for (game, state), ids in zip(requests, prompt_ids):
        if len(ids) > max_tokens:
            raise ValueError(f"{game.name}: the prompt at state {state.information_state_string()!r} is "
                             f"{len(ids)} tokens, over data.max_prompt_tokens={max_tokens}; expected "
                             "prompts up to it (raise it)")


def check_every_prompt(game, tokenizer, max_tokens, nodes=20_000):
    """check_prompt_lengths over the prompts of `game`'s decision states, each information state once,
    breadth first over at most `nodes` game-tree nodes (all of Kuhn's and Leduc's; tic-tac-toe's first
    moves): a prompt over data.max_prompt_tokens is refused before any work, not when play first
    reaches its state. Beyond that the player checks each round's prompts."""
    if max_tokens is None:
        return
    frontier, seen, requests, visited = deque([game.game.new_initial_state()]), set(), [], 0
    while frontier and visited < nodes:
        state, visited = frontier.popleft(), visited + 1
        if state.is_terminal():
            continue
        if state.is_chance_node():
            frontier.extend(state.child(a) for a, _ in state.chance_outcomes())
            continue
        if (key := state.information_state_string()) not in seen:
            seen.add(key)
            requests.append((game, state))
        frontier.extend(state.child(a) for a in state.legal_actions())
    check_prompt_lengths(requests, [encode_prompt(tokenizer, game.prompt(s)) for _, s in requests],
                         max_tokens)
