"""Documents (SPICE): a seeded corpus, questions grounded in a document, and the replies read back
(`documents`). The proposer–solver tokenizer that covers these words lives with arithmetic."""
