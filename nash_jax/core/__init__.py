"""Pure math of preference games: no I/O, no models, no global state.

`losses` holds the jit-able training objectives (JAX, fp32); `game` holds exact solvers for tabular
preference games (numpy/scipy), used to check the algorithms and to measure exploitability.
"""
