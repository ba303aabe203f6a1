"""Acceptance in instructions: ``bench.acceptance``'s world, for callgrind (issue 19).

Theory of operation
-------------------
1. Wall and CPU time are not a reading on a shared machine; instructions (callgrind's Ir)
   are. This driver builds exactly ``bench.acceptance.accepted``'s world (one
   ``ReferenceHarness`` on a SQLite file in a temporary folder with ``synchronous=FULL``,
   ``children`` held continuable children, ``senders`` concurrent senders round-robin over
   them, each awaiting its previous acknowledgement) and sends ``messages`` follow-ups.
2. Run it twice under callgrind with different message counts; the difference divided by
   the difference of counts is the Ir per accepted follow-up, with imports, the open, the
   starts and the close cancelled out::

       PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/acc.%p.out \\
           python -m bench.acceptance_callgrind --messages 500
       # ... and --messages 2000; Ir per follow-up = (Ir(2000) - Ir(500)) / 1500

   ``callgrind_annotate FILE | head`` prints a run's total. Group commit makes the count
   of ``COMMIT`` statements per message depend on timing (valgrind slows the loop, not the
   disk), so the figure carries a little noise; take it from one machine and one method.
3. ``--profile FILE`` also writes a cProfile of the senders' phase only (``pstats``). The
   run prints one JSON line: messages sent, and over the senders' phase alone, accepted
   messages per second and the process's CPU µs per message (all threads; noisy under load).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import tempfile
import time
from pathlib import Path

from bench.acceptance import HeldModel
from dsh_subagent.adapters.continuation_types import ContinuableStartSpec, ParentAgent
from dsh_subagent.adapters.protocols import Session
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.core.values import AgentOptions, CoordinatorSource, SessionId, TextBlock


async def send(
    messages: int, senders: int, children: int, folder: Path, profile: Path | None
) -> None:
    """Build the world, then send ``messages`` follow-ups from ``senders`` (rule 1)."""
    model = HeldModel()

    def model_for(_session: Session, _options: AgentOptions) -> HeldModel:
        return model

    harness = await ReferenceHarness.open(model_for, db=folder / "acc.sqlite", synchronous="FULL")
    root = await harness.create_agent("root")
    ids = [SessionId(f"c{n}") for n in range(children)]
    for child in ids:
        spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=child)
        await harness.service.start_continuable(spec)
    source = CoordinatorSource(root.id)
    per_sender = messages // senders

    async def sender(k: int) -> None:
        for n in range(per_sender):
            child = ids[(k + n) % len(ids)]
            await harness.service.followup(
                child, (TextBlock(f"m{n}"),), ParentAgent(root), source=source
            )

    profiler = cProfile.Profile()
    if profile is not None:
        profiler.enable()
    began, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(sender(k) for k in range(senders)))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    if profile is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    model.release.set()
    await harness.close()
    sent = per_sender * senders
    print(
        json.dumps(
            {
                "messages": sent,
                "msgs_per_s": round(sent / wall),
                "cpu_us_per_msg": round(cpu / sent * 1e6),
            }
        )
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--senders", type=int, default=100)
    parser.add_argument("--children", type=int, default=20)
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dsh-acc-cg-") as folder:
        asyncio.run(send(args.messages, args.senders, args.children, Path(folder), args.profile))


if __name__ == "__main__":
    main()
