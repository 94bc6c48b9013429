"""The one exception type that carries a Kafka error code back to the client."""

from kio.schema.errors import ErrorCode


class CloseConnection(Exception):
    """The request cannot be answered (e.g. a failed acks=0 produce): close the client's connection, as Kafka
    does, so that it notices and refreshes its metadata."""


class KafkaError(Exception):
    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code
        self.message = message
