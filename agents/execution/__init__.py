"""Running a configured run: plan, the whole run, a task's queries, one query, run files as a
first stage, the dry run, the published row a run matches, and Ray clusters."""
