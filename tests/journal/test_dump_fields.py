"""
The record fields of delayed delivery and delivery counts, as
`tern-journal dump` shows them (docs/JOURNAL.md, record header bytes 5..7):
a delayed item's ADD says "delayed" and its add_ms is the time it becomes
visible; OPEN and ABORT records carry the item's delivery count.
"""
import re
import time

from jutil import stopped, tern_journal


def test_dump_shows_delay_and_deliveries(ternd):
    s = ternd()
    c = s.conn()
    t0 = int(time.time() * 1000)
    c.send(b"set dq/delay=60000 0 0 1\r\nd\r\nset dq 0 0 1\r\nn\r\n")
    c.expect(b"STORED\r\nSTORED\r\n")
    c.send(b"get dq/open\r\nget dq/abort\r\nget dq/open\r\nget dq/abort\r\n")
    c.expect((b"VALUE dq/open 0 1\r\nn\r\nEND\r\nEND\r\n") * 2)
    datadir = s.datadir
    stopped(s)
    rc, out, err = tern_journal("dump", datadir, "dq")
    assert rc == 0, out + err
    adds = re.findall(r" ADD +id=(\d+) .* add_ms=(\d+)( delayed)? body=\"(\w)\"", out)
    assert [(i, d, b) for i, _, d, b in adds] == [("1", " delayed", "d"), ("2", "", "n")], out
    assert 60000 <= int(adds[0][1]) - t0 < 60000 + 30000
    marks = re.findall(r" (OPEN|ABORT) +id=2 at=\S+ deliveries=(\d+)", out)
    assert marks == [("OPEN", "1"), ("ABORT", "1"), ("OPEN", "2"), ("ABORT", "2")], out
