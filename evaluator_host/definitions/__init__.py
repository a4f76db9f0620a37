"""What is known about an evaluator's code before it runs: its interface and its pins."""
