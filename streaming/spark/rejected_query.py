"""mqqb-malformed findings in the job's first operator: the MQQB packets capture producers rejected
(msmq.qb.rejected), keyed by their sender, aggregated by the sans-IO RejectedPackets into
security_findings rows. Each is also a dead letter, written by the reading task that decoded it."""
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import StringType, StructField, StructType

from ..operators.findings import RejectedPackets, evidence
from ..wire.rejected import decode_rejected
from .stateful import ordered_rows, typed_frame

__all__ = ["RejectedPacketsProcessor"]


class RejectedPacketsProcessor(StatefulProcessor):
    def init(self, handle) -> None:
        self.state = handle.getValueState("rejected_packets", StructType([StructField("json", StringType())]))

    def handleInputRows(self, key, rows, timerValues):
        stored = self.state.get()  # get() is None when unset: one round trip to the JVM, not exists() then get()
        packets = RejectedPackets.from_json(stored[0]) if stored is not None else RejectedPackets()
        for row in ordered_rows(rows):
            # the reading task decoded this record already: it is a rejected packet's
            packets.record(decode_rejected(bytes(row.body)), evidence(row.topic, row.partition, row.offset, None))
        self.state.update((packets.to_json(),))
        out = packets.rows()
        if out:
            yield typed_frame(out)

    def close(self) -> None:
        pass
