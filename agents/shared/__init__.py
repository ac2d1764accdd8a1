"""The plain parts graphs and stages share: what an agent or stage is (specs), replayed
generations, and Ctrl-C handling."""
