"""console"""
