"""The tokenizer of a GGUF file as a transformers fast tokenizer, without torch.

transformers' own GGUF tokenizer conversion (`convert_gguf_tokenizer`: byte-level BPE, sentencepiece,
Gemma's respelled vocabulary, the control tokens as special ones) is reused as it is; only its reader
needs torch, so the metadata is read here with the `gguf` package into the same dictionaries
(`GGUF_TOKENIZER_MAPPING`) that transformers' `get_gguf_tokenizer` makes. The result encodes the same
ids as `AutoTokenizer.from_pretrained(dir, gguf_file=...)` (tests/unit/models/test_gguf.py checks it).
"""

_SPECIAL_TOKENS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                   "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}


def tokenizer_from_gguf(reader, architecture, file):
    """A PreTrainedTokenizerFast with the file's vocabulary, special tokens and chat template."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf import convert_gguf_tokenizer

    tokenizer_dict, tokenizer_config = tokenizer_metadata(reader, file)
    try:  # the tokenizers library raises plain Exceptions (a merge of tokens not in the vocabulary)
        backend, extra = convert_gguf_tokenizer(architecture, tokenizer_dict)
        return PreTrainedTokenizerFast(tokenizer_object=backend, **tokenizer_config, **extra)
    except Exception as err:
        first_line = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise ValueError(f"{file}: cannot build its tokenizer from the tokenizer.* metadata: "
                         f"{first_line}") from None


def tokenizer_metadata(reader, file):
    """(tokenizer_dict, tokenizer_config) as transformers' get_gguf_tokenizer builds them."""
    from transformers.integrations.gguf import GGUF_TOKENIZER_MAPPING

    values = {key: field.contents() for key, field in reader.fields.items()
              if key.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in values:
        raise ValueError(f"{file}: no tokenizer.ggml.tokens; expected the vocabulary in the file")
    tokenizer_dict, tokenizer_config = (
        {name: values[f"tokenizer.{key}"] for key, name in renames.items()
         if f"tokenizer.{key}" in values}
        for renames in (GGUF_TOKENIZER_MAPPING["tokenizer"], GGUF_TOKENIZER_MAPPING["tokenizer_config"]))
    kind = tokenizer_dict.get("tokenizer_type")
    if kind == "llama":  # llama.cpp adds BOS to a sentencepiece vocabulary that does not say otherwise
        tokenizer_config.setdefault("add_bos_token", True)
    elif kind == "gemma4":  # its chat template writes <bos> itself
        tokenizer_config["add_bos_token"] = False
    tokens = tokenizer_dict["tokens"]
    for name, key in _SPECIAL_TOKENS.items():
        token_id = values.get(f"tokenizer.ggml.{key}")
        tokenizer_config[name] = tokens[token_id] if token_id is not None else None
    return tokenizer_dict, tokenizer_config
