from dataclasses import dataclass


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 16
    ignore_eos: bool = False
    logprobs: int | None = None
    seed: int | None = None
