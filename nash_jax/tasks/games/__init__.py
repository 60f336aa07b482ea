"""OpenSpiel games as text: the games, their renderings and word tokenizer (`games`, games_tokenizer/),
exact exploitability of a policy on the poker games (`game_eval`), and Kuhn poker in plain words for a
real instruct model (`kuhn_chat`)."""
