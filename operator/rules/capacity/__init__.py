"""Capacity before a lecture (docs/capacity.md), decided: the DaemonSets that pull a Template's
images ahead on the nodes its Pods may land on (images), the placeholder Pods that hold room
before a lecture (room), and whether a course will be ready for its next lecture (readiness).
Pure: plain data in, objects and verdicts out."""
