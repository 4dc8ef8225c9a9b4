"""What the package reads off the user's job before it judges it: the model's repeated blocks (:mod:`.blocks`), its
batch-norm layers and device meshes (:mod:`.models`), the hooks it overrides (:mod:`.hooks`), and the arguments of the
``Trainer(...)``/``Fabric(...)`` call as Lightning reads them (:mod:`.arguments`); the node's GPUs and driver and the
installed torch build, or the simulated target's (:mod:`.machine`).

No rule lives here: the guards, the strategies' rules and the tools read these facts and decide.
"""
