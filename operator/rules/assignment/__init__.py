"""An Assignment's plan, worker Pods, status, census and Events; pure."""
