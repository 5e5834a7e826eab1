"""Issue detection before acting (RAIDER): grounded tools, the agent, its flow manager, recovery, the benchmark."""
