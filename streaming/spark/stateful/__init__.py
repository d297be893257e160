"""What every stateful operator shares: its input rows in arrival order, its sink rows as (table_name, an
Arrow IPC chunk of that table's typed rows), its dead-letter rows, its one timer per key, and the guard that
keeps one message an operator cannot handle from failing the micro-batch."""
from .dead_letters import dead_letter, timer_dead_letter
from .guarded import apply_guarded, GuardedSteps
from .input_rows import ARRIVAL_ORDER, ordered_rows
from .output_chunks import batch_rows, CHUNK_ROWS, typed_chunks, typed_frame
from .timers import replace_timers

__all__ = ["apply_guarded", "ARRIVAL_ORDER", "batch_rows", "CHUNK_ROWS", "dead_letter", "GuardedSteps",
           "ordered_rows", "replace_timers", "timer_dead_letter", "typed_chunks", "typed_frame"]
