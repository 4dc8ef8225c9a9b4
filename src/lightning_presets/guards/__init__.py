"""The guards every preset class carries: the guarded mixins, block detection and the shared rule builders."""
