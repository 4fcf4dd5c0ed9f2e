"""Start-up imports nothing of the kubernetes client package (it imports all of itself, with
requests and oauthlib: a tenth of a start-up's CPU at 10,000 volumes and 10 MiB for good)."""

import subprocess
import sys

HEAVY = ("kubernetes", "requests", "requests_oauthlib", "oauthlib", "google", "websocket")


def test_the_provisioner_and_its_cli_start_without_the_kubernetes_package() -> None:
    script = (
        "import sys\n"
        "import provisioner.__main__, provisioner.process.app, provisioner.scans.orphans_cli\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, *HEAVY], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout
