"""esopt: Evolution Strategies and GRPO post-training of LLMs on verifiable reasoning tasks."""

__version__ = "0.1.0"
