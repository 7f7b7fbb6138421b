"""The page's parts (page.py renders them): the view model read from the log, the cards, the chart, the HTML formatting."""
