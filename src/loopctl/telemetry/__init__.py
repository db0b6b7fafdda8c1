"""OpenTelemetry traces and metrics of agent runs, by the GenAI semantic conventions (``docs/telemetry.md``).

``OTelObserver`` (in :mod:`loopctl.telemetry.observer`) is an observer for ``BareLoop``; the attribute
names are constants in :mod:`loopctl.telemetry.attributes`; :func:`loopctl.telemetry.otlp.configure_otlp`
sets up the SDK with OTLP export, as ``loopctl run --otel`` does. Needs the ``[otel]`` extra
(``opentelemetry-api``); without it ``OTelObserver`` warns and records nothing. ``import loopctl`` never
imports this package.
"""

from loopctl.telemetry.observer import OTelObserver

__all__ = ["OTelObserver"]
