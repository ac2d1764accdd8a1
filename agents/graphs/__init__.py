"""The agent graphs, one module each (LangGraph), and what they share: `context` (what a graph
is given, and its trace steps) and `search_loop` (the iterative agents' transcript, tags and
final ranking). A graph's final state holds `ranking`; each graph module declares its agent's
`AgentSpec` beside its builder, and `agents/config/registry.py` lists them."""
