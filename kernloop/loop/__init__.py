"""The loop: a run's folder, one iteration (propose, screen, time, decide), the scheduler of what is in flight, resume and interrupts, the terminal lines and the last job."""
