"""Step policy: pure decisions the engine core and the worker share.

The step kind, the step output the schedulers hand the worker, which kind runs next, each
batch's sampling route, the device logprob forms and the block-output rules. Nothing here
touches a device, a model or the runner (docs/ARCHITECTURE.md)."""
