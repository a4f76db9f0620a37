"""Model targets of jobs: an OpenAI-compatible endpoint a job generates each row's outputs with (the
client, the prompt sandbox, budgets and prices, the generation stage); imports no surface and no job."""
