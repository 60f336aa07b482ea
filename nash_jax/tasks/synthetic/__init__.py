"""The synthetic demo task of SPPO and Nash-MD: prompts, styled demonstrations, the preference oracle
and its word tokenizer (`synthetic`), and the held-out win rate against the oracle (`synthetic_eval`)."""
