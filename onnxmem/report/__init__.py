"""Reports on a plan: text summaries and pictures."""
