"""The phi4 package; only its vllm_generator module is stood in for."""
