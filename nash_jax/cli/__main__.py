"""`python -m nash_jax.cli ...`: the `nash-jax` command."""

from nash_jax.cli import main

raise SystemExit(main())
