"""The test suite's helpers, one home for each job: running the CLI, waiting, reading and committing
on Kafka, building configs, and sharing the machine between parallel test workers."""
