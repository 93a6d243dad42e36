"""Time, which is not trusted: the hybrid logical clock that stamps versions (hybrid), each peer's clock
offset estimated from the replica channel (offsets), and the fence that stops a node whose own clock is the
one that is off (fence). All pure but the fence's flag."""
