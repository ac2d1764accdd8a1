"""Benchmark tasks (loading) and scoring (pytrec_eval), shared by every agent."""
