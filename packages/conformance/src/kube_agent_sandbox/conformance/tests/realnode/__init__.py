"""Real-node profile: behaviour that needs real containers (exec, exits, data on PVCs)."""
