"""Where the champion stands, in words: the diagnosis rules and the briefing the prompt, the page and the final line share."""
