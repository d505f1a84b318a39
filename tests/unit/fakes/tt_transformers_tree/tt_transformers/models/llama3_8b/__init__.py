"""The llama3_8b package; only its vllm_generator module is stood in for."""
