"""``critical_members.p2p_instances``: the matched instances that are point-to-point transfers, read from
``collectives_ranks.parquet`` through the ``collective`` column's distinct texts."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamtrace.aggregate.critical_members import p2p_instances
from streamtrace.aggregate.folder import COLLECTIVES_RANKS, table_path

INSTANCE = [4, 4, 9, 9, 2, 2, 6, 6, 11, 7, 7, 3]
COLLECTIVE = ["Send", "Recv", "AllReduce", "allreduce", "SENDRECV", "sendrecv", None, None, "recv", "Sender",
              "send ", "sEnD"]
# by hand: an instance is point-to-point when a member's collective, lower-cased, is send, recv or sendrecv;
# a null, "Sender" and "send " (a trailing space) are not
WANT = {4, 2, 11, 3}


@pytest.mark.parametrize("dictionary", [False, True])
def test_p2p_instances_are_the_send_recv_rows(tmp_path, dictionary):
    coll = pa.array(COLLECTIVE, pa.string())
    if dictionary:
        coll = coll.dictionary_encode()
    pq.write_table(pa.table({"instance": pa.array(INSTANCE, pa.int64()), "collective": coll}),
                   table_path(tmp_path, COLLECTIVES_RANKS))
    assert p2p_instances(tmp_path) == WANT


def test_no_table_no_instances(tmp_path):
    assert p2p_instances(tmp_path) == set()


def test_a_table_without_p2p(tmp_path):
    pq.write_table(pa.table({"instance": pa.array([1, 1], pa.int64()), "collective": ["AllGather", "AllGather"]}),
                   table_path(tmp_path, COLLECTIVES_RANKS))
    assert p2p_instances(tmp_path) == set()
