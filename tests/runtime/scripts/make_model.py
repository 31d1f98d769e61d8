"""Make a tiny Llama locally (no download): random weights with a fixed seed, and a byte-level BPE
tokenizer trained on the given text files (the repository's own docs).

Run under `kvenv run` on the host interpreter: torch comes from the host, transformers and
tokenizers from the overlay. Usage: make_model.py OUT_DIR TEXT_FILE...
Sizes fit vLLM's CPU attention (head_dim 64; 16 is refused) and a loaded 2-core machine.
"""

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def main(out: Path, texts: list[str]) -> None:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=256,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    print(f"made {out}: vocabulary {len(fast)}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
