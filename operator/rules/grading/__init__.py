"""An Assignment's grading: which copies to grade, the fair queue, the grading Pods; pure."""
