"""Tasks shipped with the package: data, a tokenizer and a preference oracle that need no downloads."""
