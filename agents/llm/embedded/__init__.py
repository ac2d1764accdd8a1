"""The embedded llama.cpp models: names, weights, ChatML, the instance pool, generation, the
prefix cache and the litellm provider ``local``."""
