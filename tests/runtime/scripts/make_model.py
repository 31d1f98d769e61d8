"""Make a tiny model locally (no download): random weights with a fixed seed, and a byte-level
BPE tokenizer trained on the given text files (the repository's own docs).

Run under `kvenv run` on the host interpreter: torch comes from the host, transformers and
tokenizers from the overlay. Usage: make_model.py ARCH OUT_DIR TEXT_FILE...
ARCH: llama, opt, qwen2, gpt2 or qwen2-moe. Sizes fit vLLM's CPU attention (head_dim 64; 16 is
refused) and a loaded 2-core machine; every projection of GPT-2 is non-square or square as in
the real model (c_attn 128x384: its Conv1D stores it transposed).
"""

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

HIDDEN, HEADS, LAYERS, INTERMEDIATE, POSITIONS = 128, 2, 2, 256, 256


def tokenizer(out: Path, texts: list[str]) -> PreTrainedTokenizerFast:
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trained.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    trained.train(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=trained, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(out)
    return fast


def model(arch: str, fast: PreTrainedTokenizerFast) -> torch.nn.Module:
    import transformers as t

    common = {
        "vocab_size": len(fast),
        "bos_token_id": fast.bos_token_id,
        "eos_token_id": fast.eos_token_id,
        "torch_dtype": "float32",
    }
    decoder = {
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "max_position_embeddings": POSITIONS,
        "tie_word_embeddings": False,
    }
    if arch == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(head_dim=64, **decoder, **common))
    if arch == "qwen2":
        return t.Qwen2ForCausalLM(t.Qwen2Config(**decoder, **common))
    if arch == "qwen2-moe":
        config = t.Qwen2MoeConfig(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=128,
            decoder_sparse_step=1,
            **decoder,
            **common,
        )
        return t.Qwen2MoeForCausalLM(config)
    if arch == "opt":
        config = t.OPTConfig(
            hidden_size=HIDDEN,
            ffn_dim=INTERMEDIATE,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            max_position_embeddings=POSITIONS,
            word_embed_proj_dim=HIDDEN,
            pad_token_id=fast.unk_token_id,
            **common,
        )
        return t.OPTForCausalLM(config)
    if arch == "gpt2":
        config = t.GPT2Config(
            n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS, **common
        )
        return t.GPT2LMHeadModel(config)
    raise SystemExit(f"unknown architecture {arch!r}")


def main(arch: str, out: Path, texts: list[str]) -> None:
    fast = tokenizer(out, texts)
    torch.manual_seed(0)
    made = model(arch, fast)
    with torch.no_grad():  # random weights large enough that the layers matter
        for parameter in made.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.2)
    made.save_pretrained(out, safe_serialization=True)
    print(f"made {arch} {out}: vocabulary {len(fast)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
