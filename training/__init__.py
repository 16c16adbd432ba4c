"""Training pipeline: recipes, corpus loading and cleaning, the trainer, evaluation and checkpoint averaging."""
