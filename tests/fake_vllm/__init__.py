"""Test doubles for vLLM: a fake ``vllm`` package (put this directory on ``sys.path``), a fake
``vllm serve`` executable (``fake_serve.py``) and helpers that write real safetensors
checkpoints (``checkpoints.py``)."""
