"""`python manage.py supervise`: run the brokers of every managed cluster until Ctrl-C (see supervisor.py)."""

from __future__ import annotations

import signal

from django.core.management.base import BaseCommand

from console.clusters.supervisor import Supervisor


class Command(BaseCommand):
    help = (
        "Start, watch and restart the brokers of managed clusters; Ctrl-C stops them (controlled shutdown)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--health-interval", type=float, default=1.0, help="seconds between health checks"
        )
        parser.add_argument(
            "--stop-timeout", type=float, default=60.0, help="seconds a broker has to stop before SIGKILL"
        )

    def handle(self, *args, health_interval: float, stop_timeout: float, **options):
        stopping = False

        def on_signal(signum, _frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        supervisor = Supervisor(health_interval_s=health_interval, stop_timeout_s=stop_timeout)
        self.stdout.write("supervisor: running (Ctrl-C stops the brokers)\n")
        supervisor.run(lambda: stopping)
        self.stdout.write("supervisor: stopped\n")
