"""What a person reads: the report (tables, JSON), Perfetto traces, matplotlib figures and
the step-through page. Views import the layers below them; nothing below imports a view."""
