"""The applied environment on disk: the runtime root, the store, generations, the manifest,
activation, verify and reset; :mod:`kvenv.env.apply` executes a plan into it."""
