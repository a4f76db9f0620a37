"""Migration of legacy 4-argument evaluators: one codemod per language family and the differential run.

:mod:`.codemod` asks the language's migrator (:mod:`.python` with libcst, :mod:`.js` with acorn);
:mod:`.compare` compares what two revisions answered; :mod:`.service` runs a migration end to end
(migrate, check, run both on the cases, save); :mod:`.models` are its API models.
"""
