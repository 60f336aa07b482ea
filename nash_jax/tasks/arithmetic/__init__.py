"""Arithmetic: the proposer–solver grammar, verifier and random problems (`arithmetic`), the word
tokenizer of the proposer–solver tasks, arithmetic and documents (`vocabulary`,
proposer_solver_tokenizer/), the same task in plain words for a real instruct model (`arithmetic_chat`),
and the real-model SPPO questions with their verifier (`arithmetic_questions`)."""
