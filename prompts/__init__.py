"""Prompt files used by the agents; each prompt lives in a file under this folder."""
