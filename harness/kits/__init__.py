"""Our family kits, one folder each: a kit's ``__init__`` declares its families (``FAMILIES``), its other
modules are the move table, model, driver and canaries those declarations name.

The pools themselves stay in :mod:`pools` (production code, no harness imports); what the
framework shares (the driver base, the machine, the walk, the chooser) is in :mod:`poolfuzz.harness.judge`,
:mod:`poolfuzz.harness.machines`, :mod:`poolfuzz.harness.fuzz` and :mod:`strategies`.  The registry
(:data:`poolfuzz.harness.judge.families.KITS`) lists the kits; ``docs/adding-a-family.md`` adds one.
"""
