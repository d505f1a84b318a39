"""The device boundary: opening and closing the mesh, fabric configuration, the one-line
refusal when a mesh does not open (carried to the server's exit), and the watchdog every device
call runs under. The emulated mesh is imported only where it is selected (docs/ARCHITECTURE.md)."""
