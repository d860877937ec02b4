"""The caller contracts of the SWA kit's upstream targets (:mod:`poolfuzz.harness.judge.contract`): ``swa_kv`` and
``pure_swa_kv``.  (:mod:`poolfuzz.harness.kits.swa.contract` is the driver's own table of SWA frees.)"""
