"""What both tasks' training runs share: recipes, precision records, data paths and tokenizers,
time budgets and plots."""
