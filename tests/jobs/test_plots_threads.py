"""Job plots drawn at the same time in several job threads: matplotlib's mathtext parser (log-scale tick labels
such as 10^-5) is shared module state and not thread-safe, so concurrent epsilon jobs failed as internal errors
("ValueError ... ParseException", a red-team burst of epsilon jobs on a keyed dpicl serve). app.jobs.plots draws
one figure at a time."""

from __future__ import annotations

import threading

from app.jobs.plots import line_plot_png


def test_concurrent_plots_all_draw():
    errors: list[BaseException] = []
    xs = [10.0 ** -k for k in range(1, 12)]

    def draw(i: int) -> None:
        try:
            for j in range(6):
                png = line_plot_png(xs, [x * (i + j + 1) for x in xs], xlabel="delta", ylabel="epsilon",
                                    title=f"t{i}.{j}", hline=(1e-3 * (i + 1), "target"), marker=(1e-5, 0.5, "m"),
                                    logx=True)
                assert png.startswith(b"\x89PNG")
        except BaseException as exc:  # noqa: BLE001 - collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, [f"{type(e).__name__}: {str(e)[:200]}" for e in errors]
