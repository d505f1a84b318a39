"""The llama32_1b package; only its vllm_generator module is stood in for."""
