"""A tiny PairRM directory (tokenizer, DeBERTa + head weights, config.json) built with transformers'
PyTorch classes, and the prompts the judge tests use. `pairrm_dir` is the fixture."""

import json

import pytest
import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

MARKERS = ["<|source|>", "<|candidate1|>", "<|candidate2|>", "<|candidate|>"]
WORDS = ("the quick brown fox jumps over a lazy dog and then answers every question about "
         "numbers , colours . hello world ! thanks you are good bad very long short maybe")


def write_tokenizer(path):
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([WORDS], trainers.WordLevelTrainer(
        special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        unk_token="[UNK]", mask_token="[MASK]")
    fast.add_tokens(MARKERS)  # as PairRM: ordinary added tokens after the base vocabulary
    fast.save_pretrained(path)
    return fast


@pytest.fixture(scope="module")
def pairrm_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("pairrm")
    tokenizer = write_tokenizer(path)
    ids = [tokenizer.convert_tokens_to_ids(m) for m in MARKERS]
    config = transformers.DebertaV2Config(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=512, relative_attention=True,
        position_buckets=16, max_relative_positions=64, pos_att_type=["p2c", "c2p"],
        share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
        type_vocab_size=0, layer_norm_eps=1e-7, hidden_act="gelu")
    torch.manual_seed(0)
    encoder = transformers.DebertaV2Model(config).eval()
    head = torch.nn.Sequential(torch.nn.Dropout(0.05), torch.nn.Linear(64, 32), torch.nn.Tanh(),
                               torch.nn.Dropout(0.05), torch.nn.Linear(32, 1)).eval()
    with torch.no_grad():
        for name, p in [*encoder.named_parameters(), *head.named_parameters()]:
            p.copy_((1.0 if name.endswith("LayerNorm.weight") else 0.0) + 0.2 * torch.randn_like(p))
    tensors = {f"pretrained_model.{k}": v.contiguous() for k, v in encoder.state_dict().items()}
    tensors.update({f"head_layer.{k}": v.contiguous() for k, v in head.state_dict().items()})
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    hf = config.to_dict()
    hf.update(source_prefix_id=ids[0], cand1_prefix_id=ids[1], cand2_prefix_id=ids[2],
              cand_prefix_id=ids[3], n_tasks=1)
    (path / "config.json").write_text(json.dumps(hf))
    return path, encoder, head, ids


PROMPTS = ["hello world !", "the quick brown fox jumps over a lazy dog", "numbers ?"]
CANDIDATES = [["thanks you are good", "bad", "the dog jumps", "very long answer about colours ."],
              ["a fox", "maybe the dog", "hello", "no"],
              ["one two three", "numbers , numbers", "short", "very very very long"]]
