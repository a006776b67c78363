import hashlib
import re

from tests.support.helpers import DATA


def test_shipped_data_matches_its_recorded_checksums():
    text = (DATA / "README.md").read_text()
    recorded = re.findall(r"^([0-9a-f]{64})  (\S+)$", text, flags=re.M)
    assert len(recorded) == 14
    for digest, name in recorded:
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
